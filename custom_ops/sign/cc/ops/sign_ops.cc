// Registration of the sign-packing ops: signatures and shape functions.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfcomp {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

REGISTER_OP("TfcompSignPack")
    .Input("x: T")
    .Output("words: uint32")
    .Output("scale: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      DimensionHandle n = c->NumElements(c->input(0));
      DimensionHandle words = c->UnknownDim();
      if (c->ValueKnown(n)) {
        words = c->MakeDim((c->Value(n) + 31) / 32);
      }
      c->set_output(0, c->Vector(words));
      c->set_output(1, c->Scalar());
      return Status();
    })
    .Doc(R"doc(
Packs the signs of x (any shape, flattened in row-major order) into 32-bit
words, one bit per element, and returns scale = mean |x|.
)doc");

REGISTER_OP("TfcompSignUnpack")
    .Input("words: uint32")
    .Input("scale: T")
    .Input("n: int64")
    .Output("x: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &n));
      c->set_output(0, c->Vector(n));
      return Status();
    })
    .Doc(R"doc(
Expands n packed signs to +scale (bit set) or -scale (bit clear).
)doc");

REGISTER_OP("TfcompSignMajority")
    .Input("words: uint32")
    .Input("n: int64")
    .Output("signs: dtype")
    .Attr("dtype: {half, bfloat16, float, double} = DT_FLOAT")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(1, &n));
      c->set_output(0, c->Vector(n));
      return Status();
    })
    .Doc(R"doc(
Majority vote over K workers' packed signs words[K, W]: for each of the n
elements, +1 if more workers voted positive, -1 if more voted negative, 0 on a
tie.
)doc");

}  // namespace tfcomp
