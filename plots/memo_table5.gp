# memo_table5.gp — MEMO's Table 5 against memsim: MFU over the offloaded fraction alpha at
# 192K, 256K, 320K and 384K tokens; paper dashed with open marks, memsim solid with filled
# marks; alphas that ran out of host memory are written at the bottom (paper above memsim).
# Input: table5.dat that experiments/memo/run.sh writes (blocks per length: alpha paper memsim
# paper_status memsim_status). Variables (gnuplot -e): datafile, outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1000,560 dynamic font "sans,11" } else { set terminal pngcairo size 1000,560 font "sans,10" }
set output outfile
set title "MEMO Table 5: MFU over alpha, GPT-7B, 8 x A800, TP 4, CP 2 (dashed: paper, solid: memsim)"
set xlabel "alpha (offloaded token fraction)"
set ylabel "MFU (%)"
set xrange [-0.05:1.05]
set yrange [44:56]
set grid
set key bottom left box opaque Left reverse
names = "192K 256K 320K 384K"
colors = "#1f77b4 #2ca02c #ff7f0e #d62728"
set label 1 "out-of-memory cells: upper row paper, lower row memsim" at graph 0.01, graph 0.30 font ",8"
fail(c) = (strcol(c) eq "ok" || strcol(c) eq "-") ? "" : strcol(c)
plot for [i=0:3] datafile index i using 1:2 with linespoints dashtype 2 pointtype 6 \
         lc rgb word(colors, i+1) title word(names, i+1)." (paper)", \
     for [i=0:3] datafile index i using 1:3 with linespoints dashtype 1 pointtype 7 lw 2 \
         lc rgb word(colors, i+1) title word(names, i+1)." (memsim)", \
     for [i=0:3] datafile index i using 1:(47.6 - 0.8*i):(fail(4)) with labels \
         tc rgb word(colors, i+1) font ",8" notitle, \
     for [i=0:3] datafile index i using 1:(47.2 - 0.8*i):(fail(5)) with labels \
         tc rgb word(colors, i+1) font ",8:Bold" notitle
