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
    .Input("zero_bit: bool")
    .Output("words: uint32")
    .Output("scale: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 0, &unused));
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
words, one bit per element, and returns scale = mean |x|. +0 and -0 pack as
zero_bit (an exact zero adds nothing to the scale). Memory traffic: reads x
once, writes 1/8 byte of words per element.
)doc");

REGISTER_OP("TfcompSignEfPack")
    .Input("grad: T")
    .Input("residual: T")
    .Input("zero_bit: bool")
    .Output("words: uint32")
    .Output("scale: T")
    .Output("new_residual: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle shape;
      TF_RETURN_IF_ERROR(c->Merge(c->input(0), c->input(1), &shape));
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      DimensionHandle n = c->NumElements(shape);
      DimensionHandle words = c->UnknownDim();
      if (c->ValueKnown(n)) {
        words = c->MakeDim((c->Value(n) + 31) / 32);
      }
      c->set_output(0, c->Vector(words));
      c->set_output(1, c->Scalar());
      c->set_output(2, shape);
      return Status();
    })
    .Doc(R"doc(
Error-feedback sign pack: p = grad + residual (rounded to T), scale = mean |p|
(summed as TfcompSignPack sums it), words = the signs of p (+-0 as zero_bit),
new_residual = p - (bit ? scale : -scale). Two passes: reads grad and residual
twice, writes new_residual once and 1/8 byte of words per element.
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
tie. Memory traffic: reads K/8 bytes of words, writes out once per element.
)doc");

REGISTER_OP("TfcompSignScaledSum")
    .Input("words: uint32")
    .Input("scales: T")
    .Input("n: int64")
    .Input("weight: T")
    .Output("out: T")
    .Attr("T: {half, bfloat16, float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle unused;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 0, &unused));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 0, &unused));
      DimensionHandle n;
      TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(2, &n));
      c->set_output(0, c->Vector(n));
      return Status();
    })
    .Doc(R"doc(
Scaled-sign sum over K workers' packed signs words[K, W] and their scales[K]:
out[i] = weight * sum_k (bit i of row k ? scales[k] : -scales[k]), summed in
the accumulator type in worker order. weight = 1/K gives the mean, 1 the sum.
Memory traffic: reads K/8 bytes of words, writes out once per element.
)doc");

}  // namespace tfcomp
