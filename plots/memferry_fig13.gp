# memferry_fig13.gp — MemFerry Fig. 13 in memsim: TransformerXL 0.7B-6.7B at batch 8 on an A100
# 80 GB, (a) iteration time and (b) peak GPU memory of DeepSpeed, Native-Offload, MemFerry and
# GO-MemFerry. Input: fig13.dat of `memsim memferry` (size, four times in ms, four peaks in
# GiB). Variables (gnuplot -e): datafile, outfile, fmt (png|svg). Drawn by
# experiments/memferry/run.sh.
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1200,450 dynamic font "sans,11" } else { set terminal pngcairo size 1200,450 font "sans,10" }
set output outfile
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set xlabel "TransformerXL size"
set key top left
set multiplot layout 1,2 title "Fig. 13: TransformerXL, batch 8 (A100 80GB, PCIe 3.0)"
set title "(a) iteration time"
set ylabel "ms"
plot datafile using 2:xtic(1) title "DeepSpeed" lc rgb "#7f7f7f", '' using 3 title "Native-Offload" lc rgb "#1f77b4", \
     '' using 4 title "MemFerry" lc rgb "#d62728", '' using 5 title "GO-MemFerry" lc rgb "#ff7f0e"
set title "(b) peak GPU memory"
set ylabel "GiB"
plot datafile using 6:xtic(1) title "DeepSpeed" lc rgb "#7f7f7f", '' using 7 title "Native-Offload" lc rgb "#1f77b4", \
     '' using 8 title "MemFerry" lc rgb "#d62728", '' using 9 title "GO-MemFerry" lc rgb "#ff7f0e"
unset multiplot
