set terminal pngcairo size 800,500 noenhanced font ",10"
set output 'scale.png'
set key bottom left
set grid

set title 'cep-bench scale, median of 5'
set logscale x
set xlabel 'live connections (CEPs per node)'
set ylabel 'bytes per CEP (malloc + libcep mappings)'
set y2label 'thousand connections/s (dashed)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot 'scale-libcep-ck.dat' using 1:2 with linespoints title 'libcep-ck bytes/CEP' axes x1y1, 'scale-libcep-ck.dat' using 1:($3/1e3) with linespoints dashtype 2 title 'libcep-ck connect rate' axes x1y2, 'scale-libcep-ck-presized.dat' using 1:2 with linespoints title 'libcep-ck-presized bytes/CEP' axes x1y1, 'scale-libcep-ck-presized.dat' using 1:($3/1e3) with linespoints dashtype 2 title 'libcep-ck-presized connect rate' axes x1y2
