# compare.gp — policy comparison bars: iteration time, MFU, peak reserved device memory and
# peak host memory of several policies on one workload. Input: the CSV that `memsim compare --plot` writes
# (policy,status,iter_time_s,mfu,peak_reserved_gib,host_peak_gib); failed runs (oom / oohm) have
# zeros and their status printed above the bar.
# Variables (gnuplot -e): datafile, outfile, fmt, title, capacity_gib (device memory line),
# host_gib (this job's share of host memory: its line).
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "policy comparison"
if (!exists("capacity_gib")) capacity_gib = 0
if (!exists("host_gib")) host_gib = 0
if (fmt eq "svg") { set terminal svg size 1600,420 dynamic font "sans,11" } else { set terminal pngcairo size 1600,420 font "sans,10" }
set output outfile
set datafile separator ","
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid y
set key off
set xtics rotate by -20 noenhanced
set multiplot layout 1,4 title title noenhanced
set title "iteration time (s)"
set yrange [0:*]
status(c) = (strcol(c) eq "ok") ? "" : strcol(c)
plot datafile using 3:xtic(1) lc rgb "#1f77b4", \
     '' using 0:($3):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle
set title "MFU (%)"
plot datafile using ($4*100):xtic(1) lc rgb "#2ca02c", \
     '' using 0:($4*100):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle
set title "peak reserved (GiB)"
if (capacity_gib > 0) {
  plot datafile using 5:xtic(1) lc rgb "#d62728", \
       '' using 0:($5):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle, \
       capacity_gib with lines dt 2 lw 2 lc rgb "#000000" title "device memory"
} else {
  plot datafile using 5:xtic(1) lc rgb "#d62728", \
       '' using 0:($5):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle
}
set title "peak host memory (GiB)"
if (host_gib > 0) {
  plot datafile using 6:xtic(1) lc rgb "#9467bd", \
       '' using 0:($6):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle, \
       host_gib with lines dt 2 lw 2 lc rgb "#000000" title "host memory"
} else {
  plot datafile using 6:xtic(1) lc rgb "#9467bd", \
       '' using 0:($6):(status(2)) with labels offset 0,1 tc rgb "#d62728" notitle
}
unset multiplot
