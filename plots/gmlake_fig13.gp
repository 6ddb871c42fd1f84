# gmlake_fig13.gp — GMLake Fig. 13 in memsim: utilization and peak reserved memory over batch
# sizes (LoRA + recomputation, ZeRO-3, 4 GPUs, A100 80 GB) for each model; a curve ends where
# its allocator runs out of memory. Input: fig13.dat of experiments/gmlake/plotdata.sh (one
# gnuplot index per model: model, batch, four utilization columns, four reserved columns).
# Variables (gnuplot -e): datafile, outfile, fmt, models (file order), title.
if (!exists("fmt")) fmt = "png"
if (!exists("models")) models = "opt-1.3b opt-13b vicuna-13b gpt-neox-20b"
if (!exists("title")) title = "Fig. 13: batch size (LR, ZeRO-3, 4 GPUs)"
n = words(models)
if (fmt eq "svg") { set terminal svg size 1500,700 dynamic font "sans,11" } else { set terminal pngcairo size 1500,700 font "sans,10" }
set output outfile
set datafile missing "?"
set grid
set xlabel "micro-batch"
set multiplot layout 2,n title title noenhanced
do for [i=1:n] {
    set title word(models, i) noenhanced
    set ylabel (i == 1 ? "utilization (%)" : "")
    set yrange [50:105]
    if (i == 1) { set key bottom left } else { unset key }
    plot datafile index (i-1) using 2:3 with linespoints lw 2 pt 7 lc rgb "#d62728" title "caching", \
         '' index (i-1) using 2:4 with linespoints lw 2 pt 5 lc rgb "#1f77b4" title "stitching", \
         '' index (i-1) using 2:5 with linespoints lw 1 pt 9 lc rgb "#2ca02c" title "expandable", \
         '' index (i-1) using 2:6 with linespoints lw 1 pt 11 lc rgb "#9467bd" title "static"
}
do for [i=1:n] {
    set title ""
    set ylabel (i == 1 ? "peak reserved (GiB)" : "")
    set yrange [0:85]
    unset key
    plot datafile index (i-1) using 2:7 with linespoints lw 2 pt 7 lc rgb "#d62728", \
         '' index (i-1) using 2:8 with linespoints lw 2 pt 5 lc rgb "#1f77b4", \
         '' index (i-1) using 2:9 with linespoints lw 1 pt 9 lc rgb "#2ca02c", \
         '' index (i-1) using 2:10 with linespoints lw 1 pt 11 lc rgb "#9467bd", \
         78.5 with lines dt 2 lc rgb "black" notitle
}
unset multiplot
