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
plot 'connect-libcep.dat' using 1:($2/1e3) with linespoints title 'libcep established/s', 'connect-libcep.dat' using 1:($3/1e3) with linespoints title 'libcep released/s', 'connect-libcep-presized.dat' using 1:($2/1e3) with linespoints title 'libcep-presized established/s', 'connect-libcep-presized.dat' using 1:($3/1e3) with linespoints title 'libcep-presized released/s'
