# gmlake_fig11.gp — GMLake Fig. 11 in memsim: utilization and peak reserved memory of the caching
# (PyTorch) and stitching (GMLake) allocators, LoRA + recomputation over ZeRO-3, as the number
# of GPUs grows (1..16), one panel pair per model. Input: fig11.dat of
# experiments/gmlake/plotdata.sh (one gnuplot index per model: model, GPUs, four utilization
# columns, four reserved columns). Variables (gnuplot -e): datafile, outfile, fmt, models (the
# model names in file order, blank separated), title.
if (!exists("fmt")) fmt = "png"
if (!exists("models")) models = "opt-13b vicuna-13b gpt-neox-20b"
if (!exists("title")) title = "Fig. 11: GPU scale-out (LR, ZeRO-3)"
n = words(models)
if (fmt eq "svg") { set terminal svg size 1300,700 dynamic font "sans,11" } else { set terminal pngcairo size 1300,700 font "sans,10" }
set output outfile
set datafile missing "?"
set grid
set logscale x 2
set xlabel "GPUs"
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
    set yrange [0:*]
    unset key
    plot datafile index (i-1) using 2:7 with linespoints lw 2 pt 7 lc rgb "#d62728", \
         '' index (i-1) using 2:8 with linespoints lw 2 pt 5 lc rgb "#1f77b4", \
         '' index (i-1) using 2:9 with linespoints lw 1 pt 9 lc rgb "#2ca02c", \
         '' index (i-1) using 2:10 with linespoints lw 1 pt 11 lc rgb "#9467bd"
}
unset multiplot
