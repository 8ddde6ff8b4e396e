set terminal pngcairo size 800,500 noenhanced font ",10"
set output 'table-50-25-25.png'
set key top left
set grid

set title 'cep-bench table, mix 50/25/25 (lookup/insert/delete %), median of 5, bars min..max'
set xlabel 'threads'
set ylabel 'million ops/s'
set xtics (1, 2)
set xrange [0.5:2.5]
set yrange [0:*]
plot 'table-50-25-25-libcep-ck.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'libcep-ck', 'table-50-25-25-libcep-rculfhash.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'libcep-rculfhash', 'table-50-25-25-rculfhash.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'rculfhash', 'table-50-25-25-ck_rhs.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'ck_rhs', 'table-50-25-25-ck_ht.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'ck_ht', 'table-50-25-25-rwlock.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'rwlock', 'table-50-25-25-mutex.dat' using 1:($2/1e6):($3/1e6):($4/1e6) with yerrorlines title 'mutex'
