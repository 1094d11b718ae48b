#!/usr/bin/env bash
# Installs a private CUDA 12.4 toolchain (nvcc and friends) into $1, for building
# the GPU kernels against TensorFlow 2.15's bundled CUDA 12.2 headers. Touches
# nothing outside $1: Debian non-free's nvidia-cuda-toolkit .deb (trixie) is
# fetched with a private APT config and unpacked with dpkg-deb; the crt/ headers
# matching this nvcc and libcudart come from NVIDIA's PyPI wheels.
#
#   tools/install_cuda_toolchain.sh .toolchains/cuda     # PYTHON=.venv/bin/python
#
# A second run is a no-op (stamp file). Result: $1/bin/nvcc, $1/nvvm,
# $1/include, $1/lib64/libcudart.so.12.
set -euo pipefail

DEB_PKG=nvidia-cuda-toolkit
DEB_VERSION='12.4.131~12.4.1-2'
DEB_SHA256=cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319
NVCC_WHEEL=nvidia-cuda-nvcc-cu12==12.4.131
NVCC_SHA256=e4c9a35435c3b0e36c6397c5696334c9ea6650e524736cbd1c5d345ea099bb04
CUDART_WHEEL=nvidia-cuda-runtime-cu12==12.4.127
CUDART_SHA256=64403288fa2136ee8e467cdc9c9427e0434110899d07c779f25b5c068934faa5
STAMP_TEXT="$DEB_PKG=$DEB_VERSION $NVCC_WHEEL $CUDART_WHEEL"

die() { echo "install_cuda_toolchain: error: $*" >&2; exit 1; }

[[ $# -eq 1 ]] || die "usage: $0 TOOLCHAIN_DIR (e.g. .toolchains/cuda)"
mkdir -p "$1"
PREFIX=$(cd "$1" && pwd)
STAMP=$PREFIX/.installed
if [[ -f $STAMP && "$(cat "$STAMP")" == "$STAMP_TEXT" ]]; then
  exit 0
fi
# Only ever clean up a directory this script made (never, say, /usr/local/cuda).
if [[ -n "$(ls -A "$PREFIX")" && ! -e $PREFIX/.tfcomp-toolchain ]]; then
  die "$PREFIX is not empty and was not made by this script; give an empty or new directory"
fi
touch "$PREFIX/.tfcomp-toolchain"

PYTHON=${PYTHON:-.venv/bin/python}
command -v "$PYTHON" >/dev/null || die "no Python at '$PYTHON' (set PYTHON to the venv's python)"
TF_DIR=$("$PYTHON" -c 'import importlib.util as u; print(u.find_spec("tensorflow").submodule_search_locations[0])') \
  || die "$PYTHON cannot find tensorflow"
TF_CUDA_INCLUDE=$TF_DIR/include/third_party/gpus/cuda/include
[[ -f $TF_CUDA_INCLUDE/cuda_runtime.h ]] || die "no CUDA headers in $TF_CUDA_INCLUDE (is this TensorFlow 2.15?)"
for tool in apt-get dpkg-deb sha256sum; do
  command -v $tool >/dev/null || die "$tool not found (a Debian-like system is needed)"
done

echo "Installing CUDA 12.4 toolchain into $PREFIX"
start=$SECONDS
rm -rf "$STAMP" "$PREFIX"/{bin,nvvm,include,lib64,apt,download}
APT_DIR=$PREFIX/apt
DL=$PREFIX/download
mkdir -p "$APT_DIR"/{state/lists/partial,cache/archives/partial,etc/sources.list.d,etc/preferences.d} "$DL"
touch "$APT_DIR/state/status"  # an empty "installed" database: nothing on this system counts
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie non-free" \
  >"$APT_DIR/etc/sources.list"
cat >"$APT_DIR/apt.conf" <<EOF
Dir::State "$APT_DIR/state";
Dir::State::status "$APT_DIR/state/status";
Dir::Cache "$APT_DIR/cache";
Dir::Etc::SourceList "$APT_DIR/etc/sources.list";
Dir::Etc::SourceParts "$APT_DIR/etc/sources.list.d";
Dir::Etc::Preferences "$APT_DIR/etc/preferences";
Dir::Etc::PreferencesParts "$APT_DIR/etc/preferences.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
EOF
export APT_CONFIG=$APT_DIR/apt.conf

# The one .deb holds nvcc, cicc, cudafe++, ptxas, nvlink, fatbinary and
# libdevice; its Depends (nvidia-cuda-dev, the profiler, OpenCL) are not needed.
apt-get -q update >/dev/null || die "apt-get update of Debian trixie non-free failed (network?)"
(cd "$DL" && apt-get -q download "$DEB_PKG=$DEB_VERSION" >/dev/null) \
  || die "cannot download $DEB_PKG=$DEB_VERSION from trixie non-free (superseded? update DEB_VERSION/DEB_SHA256)"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
  -d "$DL" "$NVCC_WHEEL" "$CUDART_WHEEL" || die "pip download of $NVCC_WHEEL $CUDART_WHEEL failed"
(cd "$DL" && sha256sum -c --quiet) <<EOF || die "checksum mismatch in $DL"
$DEB_SHA256  ${DEB_PKG}_${DEB_VERSION}_amd64.deb
$NVCC_SHA256  nvidia_cuda_nvcc_cu12-12.4.131-py3-none-manylinux2014_x86_64.whl
$CUDART_SHA256  nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl
EOF

dpkg-deb -x "$DL/${DEB_PKG}_${DEB_VERSION}_amd64.deb" "$DL/deb"
mkdir -p "$PREFIX"/{bin/crt,nvvm/bin,nvvm/libdevice,lib64}
# Copies, not symlinks: nvcc reads nvcc.profile from next to its real path.
cp "$DL/deb/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$PREFIX/bin/"
cp "$DL/deb/usr/lib/nvidia-cuda-toolkit/bin/crt/"*.stub "$PREFIX/bin/crt/"
for tool in cudafe++ fatbinary nvlink ptxas bin2c nvprune cuobjdump cu++filt; do
  cp "$DL/deb/usr/bin/$tool" "$PREFIX/bin/"
done
cp "$DL/deb/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$PREFIX/nvvm/bin/"
cp "$DL/deb/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc" "$PREFIX/nvvm/libdevice/"
cat >"$PREFIX/bin/nvcc.profile" <<'EOF'
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
PATH += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64"
EOF

# Headers: TensorFlow's bundled CUDA 12.2 set, with crt/ (the compiler's own
# headers) replaced by the 12.4 one matching cicc and cudafe++.
cp -r "$TF_CUDA_INCLUDE" "$PREFIX/include"
"$PYTHON" - "$DL" "$PREFIX" <<'EOF'
import glob, os, shutil, sys, zipfile
dl, prefix = sys.argv[1:]
def extract(pattern, member_prefix, dest):
    (wheel,) = glob.glob(os.path.join(dl, pattern))
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(member_prefix) and not name.endswith((".py", "/")):
                target = os.path.join(dest, name[len(member_prefix):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(name) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
shutil.rmtree(os.path.join(prefix, "include", "crt"))
extract("nvidia_cuda_nvcc_cu12-*.whl", "nvidia/cuda_nvcc/include/crt/", os.path.join(prefix, "include", "crt"))
extract("nvidia_cuda_runtime_cu12-*.whl", "nvidia/cuda_runtime/lib/", os.path.join(prefix, "lib64"))
EOF
chmod +x "$PREFIX"/bin/* "$PREFIX/nvvm/bin/cicc"
ln -s libcudart.so.12 "$PREFIX/lib64/libcudart.so"
rm -rf "$APT_DIR" "$DL"

"$PREFIX/bin/nvcc" --version | grep -q 'release 12.4' || die "the installed nvcc does not run or is not 12.4"
echo "$STAMP_TEXT" >"$STAMP"
echo "CUDA toolchain ready in $PREFIX ($((SECONDS - start)) s)"
