# memory.gp — the memory curve of one run: allocated, active and reserved device bytes and host
# bytes over simulated time. Input: the memory time series CSV that `memsim simulate --memcsv`
# writes (time_us,allocated_bytes,reserved_bytes,active_bytes,host_bytes).
# Variables (gnuplot -e): datafile, outfile, fmt ("png" or "svg"), title.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "memory over time"
if (fmt eq "svg") { set terminal svg size 1000,500 dynamic font "sans,11" } else { set terminal pngcairo size 1000,500 font "sans,10" }
set output outfile
set datafile separator ","
set key top left
set grid
set title title noenhanced
set xlabel "simulated time (ms)"
set ylabel "GiB"
GiB = 1024.0**3
plot datafile using ($1/1000):($3/GiB) with steps lw 2 lc rgb "#d62728" title "reserved", \
     ''       using ($1/1000):($4/GiB) with steps lw 1 lc rgb "#ff7f0e" title "active", \
     ''       using ($1/1000):($2/GiB) with steps lw 2 lc rgb "#1f77b4" title "allocated", \
     ''       using ($1/1000):($5/GiB) with steps lw 1 dt 2 lc rgb "#2ca02c" title "host (pinned)"
