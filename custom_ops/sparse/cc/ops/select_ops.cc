// Registration of exact threshold/top-k selection (TopK, DGC).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfcomp {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfcompSelectLargest")
    .Input("x: T")
    .Input("threshold: T")
    .Output("values: T")
    .Output("indices: Tindex")
    .Attr("capacity: int >= 0")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("Tindex: {int32, int64} = DT_INT32")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      int64_t capacity;
      TF_RETURN_IF_ERROR(c->GetAttr("capacity", &capacity));
      c->set_output(0, c->Vector(capacity));
      c->set_output(1, c->Vector(capacity));
      return Status();
    })
    .Doc(R"doc(
Exact threshold/top-k selection: among the elements of x (flattened) with
|x| >= threshold (and every NaN), the `capacity` largest by float32(|x|) (NaN
above +Inf, denormals as 0, ties to the larger index; all of them if fewer
qualify), in increasing index order, padded with value 0 and index -1.
threshold 0 is exact top-k. A radix select: two streaming reads of x (a
histogram of the magnitudes' top 12 bits, then the candidates at or above the
boundary bin) and a selection among the boundary bin's candidates; no sort of
x (on a GPU, a third read writes the winners in index order). At most 2^33
elements.
)doc");

}  // namespace tfcomp
