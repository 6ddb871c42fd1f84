# gmlake_fig10.gp — GMLake Fig. 10 in memsim: memory utilization (peak active / peak reserved)
# and peak reserved memory of the caching, stitching, expandable and static allocators over the
# strategy combinations N, R, LR, RO, LRO (ZeRO-3) for each model; missing bars ran out of
# memory (labelled OOM when all four did). Input: a fig10_b<batch>.dat table of experiments/gmlake/plotdata.sh (label, four
# utilization columns, four reserved columns). Variables (gnuplot -e): datafile, outfile, fmt
# ("png" or "svg"), title.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "Fig. 10: strategy combinations, ZeRO-3 on 4 GPUs"
if (fmt eq "svg") { set terminal svg size 1300,800 dynamic font "sans,11" } else { set terminal pngcairo size 1300,800 font "sans,10" }
set output outfile
# "?" marks an out-of-memory run: not a number, so gnuplot draws no bar there
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key outside top center horizontal
# a configuration every allocator ran out of memory on is labelled OOM
oom(c) = (strcol(c) eq "?") ? "OOM" : ""
set xtics rotate by -35 noenhanced
set multiplot layout 2,1 title title noenhanced
set ylabel "utilization (%)"
set yrange [50:105]
plot datafile using 2:xtic(1) title "caching (PyTorch)" lc rgb "#d62728", \
     '' using 3 title "stitching (GMLake)" lc rgb "#1f77b4", \
     '' using 4 title "expandable" lc rgb "#2ca02c", \
     '' using 5 title "static (greedy plan)" lc rgb "#9467bd", \
     '' using 0:(55):(oom(2)):xtic(1) with labels tc rgb "#d62728" notitle
set ylabel "peak reserved (GiB)"
set yrange [0:*]
unset key
plot datafile using 6:xtic(1) lc rgb "#d62728", '' using 7 lc rgb "#1f77b4", \
     '' using 8 lc rgb "#2ca02c", '' using 9 lc rgb "#9467bd", \
     '' using 0:(4):(oom(6)):xtic(1) with labels tc rgb "#d62728" notitle
unset multiplot
