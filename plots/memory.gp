# memory.gp — the memory curve of one run: allocated, active and reserved device bytes and host
# bytes over simulated time (top), and the device bytes live by kind, stacked (bottom). Input:
# the memory time series CSV that `memsim simulate --memcsv` writes
# (time_us,allocated_bytes,reserved_bytes,active_bytes,host_bytes, then one <kind>_bytes
# column per kind: params, grads, optstates, chunks, act_skel, act_trans, workspace, rbuf,
# idle, staging, other; traces/FORMAT.md).
# Variables (gnuplot -e): datafile, outfile, fmt ("png" or "svg"), title.
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "memory over time"
if (fmt eq "svg") { set terminal svg size 1000,800 dynamic font "sans,11" } else { set terminal pngcairo size 1000,800 font "sans,10" }
set output outfile
set datafile separator ","
set grid
GiB = 1024.0**3
set multiplot layout 2,1 title title noenhanced
set rmargin at screen 0.76   # both panels on one time axis, their keys to the right
set key outside right top noenhanced
set xlabel "simulated time (ms)"
set ylabel "GiB"
set title "allocator"
plot datafile using ($1/1000):($3/GiB) with steps lw 2 lc rgb "#d62728" title "reserved", \
     ''       using ($1/1000):($4/GiB) with steps lw 1 lc rgb "#ff7f0e" title "active", \
     ''       using ($1/1000):($2/GiB) with steps lw 2 lc rgb "#1f77b4" title "allocated", \
     ''       using ($1/1000):($5/GiB) with steps lw 1 dt 2 lc rgb "#2ca02c" title "host (pinned)"
# Stacked areas: band k is the sum of kind columns 6..5+k, drawn from the top band down so
# that each lower band covers the one above it. A kind that is 0 throughout adds nothing.
set title "device bytes live, by kind (requested)"
set style fill solid 0.8 noborder
nk = 11
array names[nk] = ["parameters", "gradients", "optimizer states", "model-state chunks", \
                   "skeletal activations", "transient activations", "workspaces", \
                   "rounding buffers", "idle rounding buffer", "staging buffers", "other"]
array colors[nk] = ["#9467bd", "#2ca02c", "#17becf", "#8c564b", "#ff7f0e", "#ffdd57", \
                    "#1f77b4", "#d62728", "#333333", "#e377c2", "#7f7f7f"]
band(k) = sum [c = 6:5 + k] column(c)
plot for [k = nk:1:-1] datafile using ($1/1000):(band(k)/GiB) with fillsteps \
     lc rgb colors[k] title names[k]
unset multiplot
