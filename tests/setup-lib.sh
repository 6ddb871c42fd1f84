# tests/setup-lib.sh — shared set-up steps for the README's two commands (tests/run.sh and
# experiments/quickstart.sh): install the Debian packages memsim needs, then configure and
# build in the source tree. Sourced, not run. Each stage says what it does on standard error
# (memsim_stage), since installing and building take minutes.

MEMSIM_DEBIAN_PACKAGES="gcc make autoconf automake libtool pkg-config zlib1g-dev libjansson-dev \
libgsl-dev liblpsolve55-dev lp-solve gnuplot-nox"
# What only the test suite needs: PyTorch's CPU build for the Python package's tests
# (tests/check_python.sh; they skip, saying why, without it).
MEMSIM_TEST_PACKAGES="python3-torch"

# memsim_stage TEXT: one progress line on standard error.
memsim_stage() {
    echo "memsim: $*" >&2
}

# memsim_install_deps [MORE PACKAGES]: the build dependencies and any more named.
memsim_install_deps() {
    local missing=()
    memsim_stage "checking the build dependencies (Debian packages)"
    for p in $MEMSIM_DEBIAN_PACKAGES $*; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "memsim: missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
        return 1
    fi
    memsim_stage "installing ${missing[*]} (apt-get update, then apt-get install)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
        >/dev/null
}

memsim_build() {
    if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ]; then
        memsim_stage "generating configure (autoreconf -fi)"
        autoreconf -fi >/dev/null
    fi
    if [ ! -f Makefile ] || [ configure -nt config.status ]; then
        memsim_stage "configuring (./configure)"
        ./configure -q
    fi
    memsim_stage "building (make -j2; about a minute on 2 cores from scratch)"
    make -j2 >/dev/null
    memsim_stage "built sim/memsim"
}
