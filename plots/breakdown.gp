# breakdown.gp — what device memory holds at each policy's peak, as stacked bars by kind
# (parameters, gradients, optimizer states, activations, lowering's buffers). Input: the CSV
# that `memsim compare --plot` writes (breakdown.csv: a header "policy,KIND,...", then per
# policy its GiB of each kind; a policy that ran out of memory is labelled "(oom)" and shows
# what was live at its failing request).
# Variables (gnuplot -e): datafile, outfile, fmt, title, nkinds (kind columns after the first),
# capacity_gib (device memory line).
if (!exists("fmt")) fmt = "png"
if (!exists("title")) title = "device memory at the peak"
if (!exists("capacity_gib")) capacity_gib = 0
if (!exists("nkinds")) nkinds = 1
if (fmt eq "svg") { set terminal svg size 900,480 dynamic font "sans,11" } else { set terminal pngcairo size 900,480 font "sans,10" }
set output outfile
set datafile separator ","
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set grid y
set key outside right top noenhanced
set xtics rotate by -20 noenhanced
set ylabel "GiB (requested bytes live at the peak)"
set yrange [0:*]
set title title noenhanced
if (capacity_gib > 0) {
  plot for [i=2:nkinds+1] datafile using i:xtic(1) title columnhead(i), \
       capacity_gib with lines dt 2 lw 2 lc rgb "#000000" title "device memory"
} else {
  plot for [i=2:nkinds+1] datafile using i:xtic(1) title columnhead(i)
}
