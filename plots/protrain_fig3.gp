# protrain_fig3.gp — ProTrain Figure 3 in memsim: the best training throughput (tokens/s on 4
# GPUs, batch swept) of ProTrain, DeepSpeed, Colossal-AI and FSDP on Table 1's models, on the
# RTX 3090 testbed (top) and the A100 testbed (bottom); "x" marks a backend that trains the
# model at no batch (out of device or host memory), black diamonds the paper's values that
# the text gives (Table 3, A100). Inputs: fig3_RTX3090.dat and fig3_A100.dat written by
# experiments/protrain/compare.awk (x memsim paper model backend). Variables (gnuplot -e):
# dir (the data directory), outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1300,820 dynamic font "sans,11" } else { set terminal pngcairo size 1300,820 font "sans,10" }
set output outfile
colors = "#2ca02c #1f77b4 #ff7f0e #d62728"
names = "ProTrain DeepSpeed Colossal-AI FSDP"
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid y
set ylabel "tokens/s (4 GPUs)"
set yrange [0:*]
set xrange [0:50]
set key outside right top box
set xtics ("Mistral-7B" 2.5, "GPT2-10B" 7.5, "LLaMA-13B" 12.5, "OPT-13B" 17.5, "GPT2-15B" 22.5, "GPT2-20B" 27.5, "GPT2-30B" 32.5, "GPT2-40B" 37.5, "OPT-30B" 42.5, "LLaMA-34B" 47.5) rotate by -20
set multiplot layout 2,1
set title "Figure 3 (memsim): 4 x RTX 3090, PCIe 3"
f = dir."/fig3_RTX3090.dat"
plot for [b=1:4] f using 1:(strcol(5) eq word(names, b) && $2 > 0 ? $2 : NaN) with boxes lc rgb word(colors, b) title word(names, b), \
     f using 1:($2 > 0 ? NaN : 40):("x") with labels tc rgb "black" font ",12" notitle
set title "Figure 3 (memsim): 4 x A100, PCIe 4 + NVLink (diamonds: paper, Table 3)"
f = dir."/fig3_A100.dat"
plot for [b=1:4] f using 1:(strcol(5) eq word(names, b) && $2 > 0 ? $2 : NaN) with boxes lc rgb word(colors, b) title word(names, b), \
     f using 1:($2 > 0 ? NaN : 200):("x") with labels tc rgb "black" font ",12" notitle, \
     f using 1:3 with points pt 13 ps 1.4 lc rgb "black" title "paper"
unset multiplot
