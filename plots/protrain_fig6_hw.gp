# protrain_fig6_hw.gp — ProTrain Figure 6 against a real GPU: the iteration time the cost model
# predicts and the one memsim's simulator gives, against the time measured on the GPU, per
# configuration of a protrain search (experiments/protrain/hw_fig6.sh). Input: fig6_hw.tsv
# (id pred_s sim_s gpu_s). Variables (gnuplot -e): datafile, outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 700,600 dynamic font "sans,11" } else { set terminal pngcairo size 700,600 font "sans,10" }
set output outfile
set datafile separator "\t"
set key top left box
set grid
set xlabel "measured on the GPU (s)"
set ylabel "predicted (s)"
set title "ProTrain configurations: predicted vs measured iteration time"
set size square
plot datafile using 4:2 skip 1 with points pt 7 ps 0.8 lc rgb "#1f77b4" title "cost model", \
     datafile using 4:3 skip 1 with points pt 6 ps 1.2 lc rgb "#d62728" title "simulator", \
     x with lines dt 2 lc rgb "#555555" title "y = x"
