// Registration of the cast-and-divide op: signature and shape function.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfcomp {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfcompCastDivide")
    .Input("x: SrcT")
    .Input("divisor: DstT")
    .Output("y: DstT")
    .Attr("SrcT: {half, bfloat16, float, double}")
    .Attr("DstT: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc(R"doc(
y = tf.cast(x, DstT) / divisor in one pass: x rounded to DstT, divided in DstT's
accumulator type (float, or double for double) and rounded back to DstT.
)doc");

}  // namespace tfcomp
