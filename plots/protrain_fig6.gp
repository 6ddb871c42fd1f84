# protrain_fig6.gp — ProTrain Figure 6 in memsim: predicted (cost model) against "actual"
# (memsim's simulation) iteration time (left) and peak memory (right) over the configurations
# the search evaluated for GPT2-10B at batch 8 on 4 x RTX 3090 (top) and 4 x A100 (bottom),
# configurations ordered by predicted peak memory. Inputs: fig6_RTX3090.dat and fig6_A100.dat
# written by experiments/protrain/run.sh (index pred_s sim_s pred_peak_gib sim_peak_gib
# appendix_pred_s: the same configuration under ProTrain's Appendix A.1 formula as written).
# Variables (gnuplot -e): dir, outfile, fmt (png or svg).
if (!exists("fmt")) fmt = "png"
if (fmt eq "svg") { set terminal svg size 1300,800 dynamic font "sans,11" } else { set terminal pngcairo size 1300,800 font "sans,10" }
set output outfile
set grid
set key below horizontal
set xlabel "configuration (ordered by predicted peak memory)"
set multiplot layout 2,2
do for [hw in "RTX3090 A100"] {
    f = dir."/fig6_".hw.".dat"
    set title hw.": iteration time"
    set ylabel "seconds"
    plot f using 1:2 with lines lw 2 lc rgb "#1f77b4" title "predicted (memsim's recurrence)", \
         f using 1:6 with lines lw 1 dt 2 lc rgb "#2ca02c" title "predicted (paper's appendix formula)", \
         f using 1:3 with points pt 7 ps 0.5 lc rgb "#d62728" title "simulated"
    set title hw.": peak memory"
    set ylabel "GiB"
    plot f using 1:4 with lines lw 2 lc rgb "#1f77b4" title "predicted", \
         f using 1:5 with points pt 7 ps 0.5 lc rgb "#d62728" title "simulated (allocated)"
}
unset multiplot
