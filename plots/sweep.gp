# sweep.gp — policies over sequence lengths or micro-batch sizes: MFU and peak reserved device
# memory against them, one line per policy; points where a policy ran out of device or host
# memory are left out (its line stops). Input: the sweep.dat that `memsim sweep --plot DIR`
# writes (one block per policy: a header line naming it, then x (K tokens or the batch size),
# MFU %, peak reserved GiB; NaN where the run failed).
# Variables (gnuplot -e): datafile, outfile, fmt, title, npol (blocks), capacity_gib (device
# memory line), xmin and xmax (the values swept, so that the axis shows them all), xlab.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "policies over sequence lengths"
if (!exists("capacity_gib")) capacity_gib = 0
if (!exists("npol")) npol = 1
if (fmt eq "svg") { set terminal svg size 1200,460 dynamic font "sans,11" } else { set terminal pngcairo size 1200,460 font "sans,10" }
set output outfile
set datafile missing "NaN"
set key bottom right noenhanced
set logscale x 2
if (exists("xmin") && exists("xmax")) { set xrange [xmin/1.2:xmax*1.2] }
set grid
if (!exists("xlab")) xlab = "sequence length (K tokens)"
set xlabel xlab
set multiplot layout 1,2 title title noenhanced
set title "MFU (%)"
set yrange [0:*]
plot for [i=0:npol-1] datafile index i using 1:2 with linespoints lw 2 pt 7 title columnheader(2)
set title "peak reserved device memory (GiB)"
set key top left noenhanced
if (capacity_gib > 0) {
  plot for [i=0:npol-1] datafile index i using 1:3 with linespoints lw 2 pt 7 title columnheader(2), \
       capacity_gib with lines dt 2 lw 2 lc rgb "#000000" title "device memory"
} else {
  plot for [i=0:npol-1] datafile index i using 1:3 with linespoints lw 2 pt 7 title columnheader(2)
}
unset multiplot
