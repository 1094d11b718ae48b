// A marker string that tfcomp/ops.py reads from the library file before
// loading it, so that a library built against another TensorFlow is refused
// with a message instead of crashing or misbehaving at run time.
#include "tensorflow/core/public/version.h"

#if GOOGLE_CUDA
#define TFCOMP_BUILT_WITH_CUDA "1"
#else
#define TFCOMP_BUILT_WITH_CUDA "0"
#endif

extern "C" __attribute__((used, visibility("default"))) const char tfcomp_build_info[] =
    "tfcomp-build-info: tensorflow=" TF_STR(TF_MAJOR_VERSION) "." TF_STR(TF_MINOR_VERSION) "."
    TF_STR(TF_PATCH_VERSION) TF_VERSION_SUFFIX " cuda=" TFCOMP_BUILT_WITH_CUDA ";";
