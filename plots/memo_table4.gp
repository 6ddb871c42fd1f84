# memo_table4.gp — MEMO's Table 4 (ablation) against memsim: MFU over sequence length for full
# recomputation, full recomputation + memory plan, full swapping + memory plan and MEMO; paper
# dashed with open marks, memsim solid with filled marks; cells that ran out of device or host
# memory are written at the bottom (paper above memsim). Input: table4.dat that
# experiments/memo/run.sh writes (blocks per method: seq_k paper memsim paper_status
# memsim_status). Variables (gnuplot -e): datafile, outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1250,560 dynamic font "sans,11" } else { set terminal pngcairo size 1250,560 font "sans,10" }
set output outfile
set title "MEMO Table 4: GPT-7B, 8 x A800, TP 4, CP 2 (dashed: paper, solid: memsim)"
set xlabel "sequence length (K tokens)"
set ylabel "MFU (%)"
set logscale x 2
set xrange [56:1024]
set xtics (64, 128, 256, 384, 512, 640, 768, 896)
set yrange [0:60]
set grid y
set key outside right top box
names = "full-recompute full-recompute+plan full-swap+plan memo"
colors = "#d62728 #ff7f0e #1f77b4 #2ca02c"
set label 1 "out-of-memory cells: upper row paper, lower row memsim" at graph 0.01, graph 0.22 font ",8"
fail(c) = (strcol(c) eq "ok" || strcol(c) eq "-") ? "" : strcol(c)
plot for [i=0:3] datafile index i using 1:2 with linespoints dashtype 2 pointtype 6 \
         lc rgb word(colors, i+1) title word(names, i+1)." (paper)", \
     for [i=0:3] datafile index i using 1:3 with linespoints dashtype 1 pointtype 7 lw 2 \
         lc rgb word(colors, i+1) title word(names, i+1)." (memsim)", \
     for [i=0:3] datafile index i using 1:(9 - 2*i):(fail(4)) with labels \
         tc rgb word(colors, i+1) font ",8" notitle, \
     for [i=0:3] datafile index i using 1:(8 - 2*i):(fail(5)) with labels \
         tc rgb word(colors, i+1) font ",8:Bold" notitle
