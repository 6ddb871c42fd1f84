# memferry_fig10b.gp — MemFerry Fig. 10(b) in memsim: GO-MemFerry's iteration time over the
# gradient reserve factor (fraction of the gradient bytes kept on the GPU), one line per model.
# Input: fig10b.dat of `memsim memferry` (reserve, then one column per model with the dynamic
# program's items as modules, one per model with unit items, one per model with module items
# whose gain counts the embedding's exposed gradient copy (go_gain=copy); the header line names them). Variables (gnuplot -e): datafile, outfile, fmt (png|svg), models (the four
# model names, blank separated). Drawn by experiments/memferry/run.sh.
if (!exists("fmt")) fmt = "png"
if (!exists("models")) models = "bert-base bert-large roberta-base gpt2-medium"
if (fmt eq "svg") { set terminal svg size 1100,380 dynamic font "sans,11" } else { set terminal pngcairo size 1100,380 font "sans,10" }
set output outfile
set grid
set key right top samplen 2 font ",8"
set xlabel "reserve factor"
set xrange [0:1]
set multiplot layout 1,words(models) title "Fig. 10(b): GO-MemFerry over the reserve factor (A100 80GB, PCIe 3.0)"
do for [i=1:words(models)] {
    set title word(models, i) noenhanced
    set ylabel (i == 1 ? "iteration time (ms)" : "")
    plot datafile using 1:(column(i + 1)) with linespoints lw 2 pt 7 lc rgb "#ff7f0e" title (i == 1 ? "module items" : ""), \
         datafile using 1:(column(i + 1 + words(models))) with linespoints lw 1 dt 2 pt 6 lc rgb "#1f77b4" title (i == 1 ? "unit items" : ""), \
         datafile using 1:(column(i + 1 + 2 * words(models))) with linespoints lw 1 dt 3 pt 4 lc rgb "#2ca02c" title (i == 1 ? "module items, go\\_gain=copy" : "")
}
unset multiplot
