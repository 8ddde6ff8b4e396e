set terminal pngcairo size 800,500 noenhanced font ",10"
set output 'connect.png'
set key bottom right
set grid

set title 'cep-bench connect, median of 5'
set xlabel 'workers'
set ylabel 'thousand connections/s'
set xtics (1, 2)
set xrange [0.5:2.5]
set yrange [0:*]
plot 'connect-libcep-ck.dat' using 1:($2/1e3) with linespoints title 'libcep-ck established/s', 'connect-libcep-ck.dat' using 1:($3/1e3) with linespoints title 'libcep-ck released/s', 'connect-libcep-ck-presized.dat' using 1:($2/1e3) with linespoints title 'libcep-ck-presized established/s', 'connect-libcep-ck-presized.dat' using 1:($3/1e3) with linespoints title 'libcep-ck-presized released/s', 'connect-libcep-ck-qsbr.dat' using 1:($2/1e3) with linespoints title 'libcep-ck-qsbr established/s', 'connect-libcep-ck-qsbr.dat' using 1:($3/1e3) with linespoints title 'libcep-ck-qsbr released/s', 'connect-libcep-rculfhash.dat' using 1:($2/1e3) with linespoints title 'libcep-rculfhash established/s', 'connect-libcep-rculfhash.dat' using 1:($3/1e3) with linespoints title 'libcep-rculfhash released/s', 'connect-libcep-rculfhash-presized.dat' using 1:($2/1e3) with linespoints title 'libcep-rculfhash-presized established/s', 'connect-libcep-rculfhash-presized.dat' using 1:($3/1e3) with linespoints title 'libcep-rculfhash-presized released/s'
