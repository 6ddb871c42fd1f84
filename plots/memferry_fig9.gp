# memferry_fig9.gp — MemFerry Fig. 9 (iteration time) or Fig. 12 (peak GPU memory) in memsim:
# DeepSpeed, Native-Offload, MemFerry and GO-MemFerry on BERT-base, BERT-large, RoBERTa and
# GPT-2-medium, one A100 80 GB with PCIe 3.0. Input: fig9.dat or fig12.dat of `memsim memferry`
# (model, then one column per method). Variables (gnuplot -e): datafile, outfile, fmt (png|svg),
# ylabel, title. Drawn by experiments/memferry/run.sh.
if (!exists("fmt")) fmt = "png"
if (!exists("ylabel")) ylabel = "iteration time (ms)"
if (!exists("title")) title = "Fig. 9: iteration time (A100 80GB, PCIe 3.0)"
if (fmt eq "svg") { set terminal svg size 900,480 dynamic font "sans,11" } else { set terminal pngcairo size 900,480 font "sans,10" }
set output outfile
set title title noenhanced
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set ylabel ylabel
set key top left
set xtics noenhanced
plot datafile using 2:xtic(1) title "DeepSpeed" lc rgb "#7f7f7f", \
     '' using 3 title "Native-Offload" lc rgb "#1f77b4", \
     '' using 4 title "MemFerry" lc rgb "#d62728", \
     '' using 5 title "GO-MemFerry" lc rgb "#ff7f0e"
