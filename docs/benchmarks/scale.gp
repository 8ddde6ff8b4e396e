set terminal pngcairo size 800,500 noenhanced font ",10"
set output 'scale.png'
set key bottom left
set grid

set title 'cep-bench scale, median of 5'
set logscale x
set xlabel 'live connections (CEPs per node)'
set ylabel 'bytes per CEP (mallinfo2)'
set y2label 'thousand connections/s (dashed)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot 'scale-libcep.dat' using 1:2 with linespoints title 'libcep bytes/CEP' axes x1y1, 'scale-libcep.dat' using 1:($3/1e3) with linespoints dashtype 2 title 'libcep connect rate' axes x1y2, 'scale-libcep-presized.dat' using 1:2 with linespoints title 'libcep-presized bytes/CEP' axes x1y1, 'scale-libcep-presized.dat' using 1:($3/1e3) with linespoints dashtype 2 title 'libcep-presized connect rate' axes x1y2
