# protrain_table2.gp — ProTrain Table 2 against memsim: the largest GPT-2 (billions of
# parameters) each backend trains on 1 and 4 GPUs of the RTX 3090 and A100 testbeds; memsim's
# values as bars, the paper's as black diamonds. Input: table2.dat written by
# experiments/protrain/compare.awk (x paper memsim group backend). Variables (gnuplot -e):
# datafile, outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1100,520 dynamic font "sans,11" } else { set terminal pngcairo size 1100,520 font "sans,10" }
set output outfile
set title "ProTrain Table 2: largest trainable GPT-2 (bars: memsim, diamonds: paper)"
set ylabel "model size (billion parameters)"
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid y
set yrange [0:*]
set xrange [0:20]
set key outside right top box
set xtics ("RTX 3090 x1" 2.5, "RTX 3090 x4" 7.5, "A100 x1" 12.5, "A100 x4" 17.5)
colors = "#2ca02c #1f77b4 #ff7f0e #d62728"
names = "ProTrain DeepSpeed Colossal-AI FSDP"
plot for [b=1:4] datafile using ($1):(strcol(5) eq word(names, b) ? $3 : NaN) with boxes \
         lc rgb word(colors, b) title word(names, b), \
     datafile using 1:2 with points pt 13 ps 1.6 lc rgb "black" title "paper"
