# memferry_fig11.gp — MemFerry Fig. 11 in memsim: the largest model each method trains on a V100
# 32 GB at batch 1 (the transformerxl-2.4b shape with more or fewer layers). Input: fig11.dat of
# `memsim memferry` ("method" billions). Variables (gnuplot -e): datafile, outfile, fmt
# (png|svg). Drawn by experiments/memferry/run.sh.
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 700,420 dynamic font "sans,11" } else { set terminal pngcairo size 700,420 font "sans,10" }
set output outfile
set title "Fig. 11: largest trainable model (V100 32GB, batch 1)"
set style fill solid 0.85 border -1
set boxwidth 0.6
set grid ytics
set yrange [0:*]
set ylabel "parameters (billions)"
set xtics noenhanced
plot datafile using 0:2:xtic(1) with boxes lc rgb "#1f77b4" notitle, \
     '' using 0:2:(sprintf("%.2f", $2)) with labels offset 0,0.8 notitle
