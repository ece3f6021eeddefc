#!/bin/sh
# Which build of torch the course's environment gets, and which one it holds: `make setup` (and
# so `make lab`, `make check`, ...) runs this before it installs anything.
#
#   sh helpers/scripts/torch_build.sh choose VENV TORCH GOAL   the build to install, on stdout
#                                   (cpu, cuda, cu126, ...), and on stderr one line: which, why,
#                                   and how to get the other
#   sh helpers/scripts/torch_build.sh check VENV TORCH GOAL    nothing when VENV holds the build
#                                   TORCH asks for (or TORCH is auto); otherwise what VENV holds,
#                                   what TORCH asks for and what to do, and exit status 2
#
# TORCH  auto (the Makefile's default): the build VENV holds; for a new VENV, on Linux without
#        an NVIDIA GPU (no nvidia-smi on PATH, no /proc/driver/nvidia/version) the CPU build,
#        with one PyPI's build (CUDA on Linux x86-64); elsewhere (macOS) PyPI's build, CPU
#        already
#        cpu, cu126, ...: that build (install_requirements.sh takes it from pip's own
#        configuration where it is there, else from PyTorch's index of that name)
#        cuda, or empty: PyPI's build
# GOAL   the make target the student ran (lab, check, setup), for the advice
#
# What VENV holds: the build that `make setup` wrote into VENV/.installed; for an environment
# made before it did (or by the Docker image's first install), the local version of its torch
# (torch 2.13.0+cpu: cpu; 2.13.0+cu126: cu126; a plain 2.13.0: PyPI's).
set -eu

usage="usage: sh torch_build.sh choose|check VENV TORCH [GOAL]"
[ "$#" -ge 3 ] || { echo "$usage" >&2; exit 2; }
action=$1
venv=$2
torch=$3
goal=${4:-setup}

# the build TORCH names, or "auto"
asked() {
    case "$1" in
        '' | cuda) echo cuda ;;
        *) echo "$1" ;;
    esac
}

# What the environment holds: its record, else its torch's local version, else nothing.
held() {
    if [ -s "$venv/.installed" ]; then
        recorded=$(head -n 1 "$venv/.installed")
        case "$recorded" in
            '' | *[!a-z0-9.]*) ;;
            *) echo "$recorded"; return ;;
        esac
    fi
    for info in "$venv"/lib/python3*/site-packages/torch-*.dist-info; do
        [ -d "$info" ] || continue
        version=${info##*/torch-}
        version=${version%.dist-info}
        case "$version" in
            *+*) echo "${version#*+}" ;;
            *) echo cuda ;;
        esac
        return
    done
}

# In words, for the student.
describe() {
    case "$1" in
        cpu) echo "torch's CPU build" ;;
        cuda)
            if [ "$(uname -s)" = Darwin ]; then
                echo "PyPI's torch (a CPU build on macOS)"
            else
                echo "PyPI's torch (the CUDA build on Linux x86-64)"
            fi ;;
        *) echo "torch's $1 build (PyTorch's $1 index)" ;;
    esac
}

# The build for this machine, and why: "BUILD REASON..."
detect() {
    if [ "$(uname -s)" != Linux ]; then
        echo "cuda TORCH=auto takes PyPI's on $(uname -s)"
    elif command -v nvidia-smi >/dev/null 2>&1; then
        echo "cuda TORCH=auto found an NVIDIA GPU (nvidia-smi)"
    elif [ -e /proc/driver/nvidia/version ]; then
        echo "cuda TORCH=auto found an NVIDIA GPU (/proc/driver/nvidia/version)"
    else
        echo "cpu TORCH=auto found no NVIDIA GPU (no nvidia-smi, no /proc/driver/nvidia/version)"
    fi
}

other() {
    if [ "$1" = cpu ]; then echo cuda; else echo cpu; fi
}

wanted=$(asked "$torch")
holds=$(held)

case "$action" in
    choose)
        if [ "$wanted" != auto ]; then
            build=$wanted
            why=", as TORCH=${torch:-\"\"} asks"
        elif [ -n "$holds" ]; then
            build=$holds
            why=", which $venv holds (TORCH=auto keeps it)"
        else
            found=$(detect)
            build=${found%% *}
            why=": ${found#* }"
        fi
        alternative=$(other "$build")
        echo "make: $(describe "$build")$why. For $(describe "$alternative"):" \
             "make clean, then make $goal TORCH=$alternative" >&2
        echo "$build"
        ;;
    check)
        if [ "$wanted" = auto ] || [ -z "$holds" ] || [ "$wanted" = "$holds" ]; then
            exit 0
        fi
        echo "make: $venv holds $(describe "$holds"), and TORCH=${torch:-\"\"} asks for" \
             "$(describe "$wanted"). Nothing was installed or started. To switch, make $venv" \
             "again: make clean, then make $goal TORCH=${torch:-cuda} (a few minutes; your" \
             "work/ is kept). To go on with what $venv holds: make $goal (without TORCH)." >&2
        exit 2
        ;;
    *)
        echo "$usage" >&2
        exit 2
        ;;
esac
