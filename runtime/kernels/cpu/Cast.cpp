//===- Cast.cpp - Dtype casts and gradient accumulation -------------------===//

#include "cpu/Cast.h"

#include "cpu/Activations.h"

namespace zeroc::cpu {

static std::string checkSameCount(const char *op, const char *name,
                                  const Tensor &t, const char *otherName,
                                  const Tensor &other) {
  if (t.numel() != other.numel())
    return std::string(op) + ": " + name + " " + describe(t) +
           " must have as many elements as " + otherName + " " +
           describe(other);
  return "";
}

Status checkCastTensor(const Tensor &src, const Tensor &dst) {
  return firstError(
      {checkFloat("cast", "source", src),
       checkFloat("cast", "destination", dst),
       checkSameCount("cast", "destination", dst, "source", src)});
}

Status checkAccumulate(const Tensor &acc, const Tensor &g) {
  return firstError(
      {checkFloat("accumulate", "accumulator", acc),
       checkFloat("accumulate", "gradient", g),
       checkSameCount("accumulate", "gradient", g, "accumulator", acc)});
}

Status checkZeroTensor(const Tensor &t) {
  return firstError({checkFloat("zero", "tensor", t)});
}

Status castTensor(const Tensor &src, const Tensor &dst) {
  ZEROC_RETURN_IF_ERROR(checkCastTensor(src, dst));
  copyElements(src, 0, dst, 0, src.numel());
  return {};
}

Status accumulate(const Tensor &acc, const Tensor &g) {
  ZEROC_RETURN_IF_ERROR(checkAccumulate(acc, g));
  // An elementwise add in place, with g viewed in acc's shape.
  Tensor reshaped = g;
  reshaped.shape = acc.shape;
  return add(acc, reshaped, acc);
}

Status zeroTensor(const Tensor &t) {
  ZEROC_RETURN_IF_ERROR(checkZeroTensor(t));
  zeroElements(t, 0, t.numel());
  return {};
}

} // namespace zeroc::cpu
