# sweep.gp — policies over sequence lengths: MFU and peak reserved device memory against the
# sequence length, one line per policy; lengths where a policy ran out of device or host
# memory are left out (its line stops). Input: the sweep.dat that `memsim sweep --plot DIR`
# writes (one block per policy: a header line naming it, then seq in K tokens, MFU %, peak
# reserved GiB; NaN where the run failed).
# Variables (gnuplot -e): datafile, outfile, fmt, title, npol (blocks), capacity_gib (device
# memory line), kmin and kmax (the lengths swept, in K tokens, so that the axis shows them all).
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "policies over sequence lengths"
if (!exists("capacity_gib")) capacity_gib = 0
if (!exists("npol")) npol = 1
if (fmt eq "svg") { set terminal svg size 1200,460 dynamic font "sans,11" } else { set terminal pngcairo size 1200,460 font "sans,10" }
set output outfile
set datafile missing "NaN"
set key bottom left noenhanced
set logscale x 2
if (exists("kmin") && exists("kmax")) { set xrange [kmin/1.2:kmax*1.2] }
set grid
set xlabel "sequence length (K tokens)"
set multiplot layout 1,2 title title noenhanced
set title "MFU (%)"
set yrange [0:*]
plot for [i=0:npol-1] datafile index i using 1:2 with linespoints lw 2 pt 7 title columnheader(2)
set title "peak reserved device memory (GiB)"
if (capacity_gib > 0) {
  plot for [i=0:npol-1] datafile index i using 1:3 with linespoints lw 2 pt 7 title columnheader(2), \
       capacity_gib with lines dt 2 lw 2 lc rgb "#000000" title "device memory"
} else {
  plot for [i=0:npol-1] datafile index i using 1:3 with linespoints lw 2 pt 7 title columnheader(2)
}
unset multiplot
