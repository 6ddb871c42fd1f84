# gmlake_fig14.gp — GMLake Fig. 14 in memsim: the memory trace of GPT-NeoX-20B (LoRA +
# recomputation, ZeRO-3, 4 GPUs) over ten iterations — active and reserved memory of the
# caching (PyTorch) and stitching (GMLake) allocators against the allocator-call index (memsim
# replays memory without time) — and GMLake's stitches per iteration. Inputs: fig14_series.csv
# of `memsim gmlake` (allocator,event,iteration,active_gib,reserved_gib: window maxima) and
# fig14_stitches.dat of experiments/gmlake/plotdata.sh. Variables (gnuplot -e): seriesfile,
# stitchfile, outfile, fmt, title.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "Fig. 14: memory trace, GPT-NeoX-20B, LR, 4 GPUs"
if (fmt eq "svg") { set terminal svg size 1200,800 dynamic font "sans,11" } else { set terminal pngcairo size 1200,800 font "sans,10" }
set output outfile
set multiplot layout 2,1 title title noenhanced
set datafile separator ","
set grid
set key top left
set xlabel "allocator call (alloc or free), in program order"
set ylabel "GiB"
set yrange [0:*]
sel(a, want, v) = (a eq want) ? v : NaN
plot seriesfile using 2:(sel(strcol(1), "caching", $5)) every ::1 with lines lw 2 lc rgb "#d62728" title "caching reserved", \
     ''         using 2:(sel(strcol(1), "caching", $4)) every ::1 with lines lw 1 lc rgb "#ff9896" title "caching active", \
     ''         using 2:(sel(strcol(1), "stitching", $5)) every ::1 with lines lw 2 lc rgb "#1f77b4" title "stitching reserved", \
     ''         using 2:(sel(strcol(1), "stitching", $4)) every ::1 with lines lw 1 dt 2 lc rgb "#aec7e8" title "stitching active"
set datafile separator whitespace
set xlabel "iteration"
set ylabel "stitches (GMLake)"
set style fill solid 0.8
set boxwidth 0.6
set xrange [-0.5:*]
unset key
plot stitchfile using 1:2 with boxes lc rgb "#1f77b4", '' using 1:2:2 with labels offset 0,0.8 notitle
unset multiplot
