# timeline.gp — the stream timeline of one run: one lane per stream / engine (compute, D2H copy,
# H2D copy, host CPU) with a box per action. Input: the intervals CSV that `memsim simulate
# --plot` writes (lane,start_us,end_us,kind) where lane is 0..4 (4: the host issue thread, with
# --issue-ahead) and kind 0 = compute,
# 1 = recompute, 2 = copy, 3 = allocator/sync, 4 = host.
# Variables (gnuplot -e): datafile, outfile, fmt, title.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "stream timeline"
if (fmt eq "svg") { set terminal svg size 1200,360 dynamic font "sans,11" } else { set terminal pngcairo size 1200,360 font "sans,10" }
set output outfile
set datafile separator ","
set title title noenhanced
set xlabel "simulated time (ms)"
set yrange [-0.6:4.6]
set ytics ("compute" 0, "D2H copy" 1, "H2D copy" 2, "host CPU" 3, "host thread" 4)
set grid x
set style fill solid 0.85 noborder
set palette defined (0 "#1f77b4", 1 "#9467bd", 2 "#2ca02c", 3 "#d62728", 4 "#8c564b")
set cbrange [0:4]
unset colorbox
plot datafile using (($2+$3)/2000):1:(($3-$2)/2000):(0.35):4 with boxxyerror lc palette notitle
