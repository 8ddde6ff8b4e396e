set terminal pngcairo size 800,500 noenhanced font ",10"
set output 'dispatch.png'
set key bottom right
set grid

set title 'cep-bench dispatch, median of 5'
set xlabel 'workers'
set ylabel 'thousand MADs/s'
set xtics (1, 2)
set xrange [0.5:2.5]
set yrange [0:*]
plot 'dispatch-libcep-1feeder.dat' using 1:($2/1e3) with linespoints title 'libcep-1feeder MADs/s', 'dispatch-libcep-2feeder.dat' using 1:($2/1e3) with linespoints title 'libcep-2feeder MADs/s'
