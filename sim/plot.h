/* plot.h — draws figures by running gnuplot (a run-time dependency, looked up on the PATH)
 * with the scripts in plots/. Used by memsim simulate / compare and the experiments. */
#ifndef MEMSIM_PLOT_H
#define MEMSIM_PLOT_H

#include "base/util.h"

/* 1 if gnuplot is on the PATH. */
int plot_available(void);
/* The folder holding the gnuplot scripts: $MEMSIM_PLOTDIR, the source tree's plots/, or the
 * installed one. */
const char *plot_dir(void);
/* Runs plots/SCRIPT.gp on datafile, writing outbase.png and outbase.svg. extra_vars is more
 * gnuplot -e text ("capacity_gib=78") or NULL. MS_ERR_NOTFOUND with a clear message when
 * gnuplot is missing. */
ms_status plot_draw(const char *script, const char *datafile, const char *outbase,
                    const char *title, const char *extra_vars, ms_error *err);

#endif
