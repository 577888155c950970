//===- ModelOps.cpp - Verifiers and interfaces of the model ops -----------===//
//
// Shape and dtype rules of every op, with messages that say what was expected
// and what was found, and each op's cost and saved-for-backward accounting.
//
//===----------------------------------------------------------------------===//

#include "model/ModelOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace zeroc;
using namespace zeroc::model;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::optional<DType> zeroc::model::toDType(Type t) {
  if (t.isF32())
    return DType::F32;
  if (t.isBF16())
    return DType::BF16;
  if (t.isF16())
    return DType::F16;
  if (t.isSignlessInteger(32))
    return DType::I32;
  return std::nullopt;
}

int64_t zeroc::model::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  std::optional<DType> dtype = toDType(tensor.getElementType());
  return dtype ? tensor.getNumElements() * bytesPerElement(*dtype) : 0;
}

int64_t zeroc::model::detail::operandAndResultBytes(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += tensorBytes(t);
  for (Type t : op->getResultTypes())
    bytes += tensorBytes(t);
  return bytes;
}

static RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

static int64_t numElements(Value v) { return tensorOf(v).getNumElements(); }

/// "[4, 1024, 768]"
static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

static LogicalResult expectRank(Operation *op, StringRef name, Value v,
                                int64_t rank, StringRef layout) {
  int64_t found = tensorOf(v).getRank();
  if (found == rank)
    return success();
  return op->emitOpError() << name << " must be rank " << rank << " (" << layout
                           << "), found rank " << found << " "
                           << shapeString(tensorOf(v).getShape());
}

/// Every float operand and result shares the element type of `ref`.
static LogicalResult expectSameElementType(Operation *op, StringRef refName,
                                           Value ref) {
  Type expected = tensorOf(ref).getElementType();
  auto check = [&](StringRef kind, unsigned index, Value v) -> LogicalResult {
    Type found = tensorOf(v).getElementType();
    if (!isa<FloatType>(found) || found == expected)
      return success();
    return op->emitOpError() << kind << " #" << index << " has element type "
                             << found << ", expected " << expected
                             << " (the element type of " << refName << ")";
  };
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (failed(check("operand", i, v)))
      return failure();
  for (auto [i, v] : llvm::enumerate(op->getResults()))
    if (failed(check("result", i, v)))
      return failure();
  return success();
}

static LogicalResult expectShape(Operation *op, StringRef name, Value v,
                                 ArrayRef<int64_t> expected, StringRef why) {
  ArrayRef<int64_t> found = tensorOf(v).getShape();
  if (found == expected)
    return success();
  return op->emitOpError() << name << " has shape " << shapeString(found)
                           << ", expected " << shapeString(expected) << " ("
                           << why << ")";
}

//===----------------------------------------------------------------------===//
// ParamOp, ParamRefOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  RankedTensorType type = getTensorType();
  if (type.getRank() == 0)
    return emitOpError() << "parameter @" << getSymName()
                         << " must have rank >= 1, found a 0-d tensor";
  if (llvm::is_contained(type.getShape(), 0))
    return emitOpError() << "parameter @" << getSymName()
                         << " has an empty dimension in its shape "
                         << shapeString(type.getShape());
  return success();
}

LogicalResult ParamRefOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  Operation *target =
      symbolTable.lookupNearestSymbolFrom(*this, getParamAttr());
  auto param = dyn_cast_or_null<ParamOp>(target);
  if (!param)
    return emitOpError() << getParamAttr()
                         << (target ? " is not a model.param"
                                    : " does not name a model.param in the "
                                      "enclosing module");
  if (param.getType() != getType())
    return emitOpError() << "result type " << getType()
                         << " does not match the type " << param.getType()
                         << " of parameter " << getParamAttr();
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (failed(expectRank(*this, "table", getTable(), 2, "[vocab, hidden]")) ||
      failed(expectRank(*this, "ids", getIds(), 2, "[batch, seq]")))
    return failure();
  ArrayRef<int64_t> ids = tensorOf(getIds()).getShape();
  int64_t hidden = tensorOf(getTable()).getDimSize(1);
  if (failed(expectShape(*this, "result", getResult(), {ids[0], ids[1], hidden},
                         "[batch, seq] of ids, hidden of the table")))
    return failure();
  return expectSameElementType(*this, "the table", getTable());
}

int64_t EmbeddingOp::getForwardFlops() { return 0; }

// Reads one table row per token, not the whole table.
int64_t EmbeddingOp::getForwardBytes() {
  return tensorBytes(getIds().getType()) +
         2 * tensorBytes(getResult().getType());
}

void EmbeddingOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getIds());
}

LogicalResult PositionEmbeddingOp::verify() {
  if (failed(expectRank(*this, "table", getTable(), 2,
                        "[max_positions, hidden]")) ||
      failed(
          expectRank(*this, "result", getResult(), 3, "[batch, seq, hidden]")))
    return failure();
  ArrayRef<int64_t> table = tensorOf(getTable()).getShape();
  ArrayRef<int64_t> result = tensorOf(getResult()).getShape();
  if (result[1] > table[0])
    return emitOpError() << "sequence length " << result[1] << " exceeds the "
                         << table[0] << " positions of the table";
  if (result[2] != table[1])
    return emitOpError() << "result hidden size " << result[2]
                         << " does not match the table's hidden size "
                         << table[1];
  return expectSameElementType(*this, "the table", getTable());
}

int64_t PositionEmbeddingOp::getForwardFlops() { return 0; }

// Reads seq rows of the table and writes the broadcast result.
int64_t PositionEmbeddingOp::getForwardBytes() {
  RankedTensorType result = tensorOf(getResult());
  return tensorBytes(result) / result.getDimSize(0) + tensorBytes(result);
}

void PositionEmbeddingOp::getSavedValues(SmallVectorImpl<Value> &) {}

//===----------------------------------------------------------------------===//
// LinearOp
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  RankedTensorType input = tensorOf(getInput());
  if (input.getRank() < 2)
    return emitOpError() << "input must be rank >= 2 ([..., in_features]), "
                            "found rank "
                         << input.getRank();
  if (failed(expectRank(*this, "weight", getWeight(), 2,
                        "[out_features, in_features]")))
    return failure();
  ArrayRef<int64_t> weight = tensorOf(getWeight()).getShape();
  int64_t in = input.getShape().back();
  if (weight[1] != in)
    return emitOpError() << "weight " << shapeString(weight) << " expects "
                         << weight[1] << " input features, but the input "
                         << shapeString(input.getShape()) << " has " << in;
  if (getBias() && failed(expectShape(*this, "bias", getBias(), {weight[0]},
                                      "[out_features] of the weight")))
    return failure();
  SmallVector<int64_t> expected(input.getShape());
  expected.back() = weight[0];
  if (failed(expectShape(*this, "result", getResult(), expected,
                         "input with its last dimension replaced by "
                         "out_features")))
    return failure();
  return expectSameElementType(*this, "the input", getInput());
}

int64_t LinearOp::getForwardFlops() {
  RankedTensorType weight = tensorOf(getWeight());
  int64_t rows = numElements(getInput()) / weight.getDimSize(1);
  int64_t flops = 2 * rows * weight.getNumElements();
  if (getBias())
    flops += rows * weight.getDimSize(0);
  return flops;
}

// dW needs the input; dX needs the weight, which is a parameter.
void LinearOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
  saved.push_back(getWeight());
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

/// Weight (and bias) of shape [hidden], result of the input's type.
static LogicalResult verifyNorm(Operation *op, Value input,
                                ArrayRef<std::pair<StringRef, Value>> affine,
                                Value result, double epsilon) {
  int64_t hidden = tensorOf(input).getShape().empty()
                       ? 0
                       : tensorOf(input).getShape().back();
  if (tensorOf(input).getRank() < 1)
    return op->emitOpError() << "input must have rank >= 1";
  for (auto [name, v] : affine)
    if (failed(expectShape(op, name, v, {hidden},
                           "[hidden], the last dimension of the input")))
      return failure();
  if (result.getType() != input.getType())
    return op->emitOpError()
           << "result type " << result.getType()
           << " does not match the input type " << input.getType();
  if (!(epsilon > 0.0))
    return op->emitOpError() << "epsilon must be positive, found " << epsilon;
  return expectSameElementType(op, "the input", input);
}

/// Rows normalized: every element of the input but the last dimension.
static int64_t normRows(Value input) {
  return numElements(input) / tensorOf(input).getShape().back();
}

LogicalResult LayerNormOp::verify() {
  return verifyNorm(*this, getInput(),
                    {{"weight", getWeight()}, {"bias", getBias()}}, getResult(),
                    getEpsilon().convertToDouble());
}

// Per element: mean 1, variance 3, normalize 2, affine 2.
int64_t LayerNormOp::getForwardFlops() { return 8 * numElements(getInput()); }

void LayerNormOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

// Mean and reciprocal standard deviation, f32, one each per row.
int64_t LayerNormOp::getSavedInternalBytes() {
  return 2 * 4 * normRows(getInput());
}

LogicalResult RMSNormOp::verify() {
  return verifyNorm(*this, getInput(), {{"weight", getWeight()}}, getResult(),
                    getEpsilon().convertToDouble());
}

// Per element: square and sum 2, normalize 1, scale 1.
int64_t RMSNormOp::getForwardFlops() { return 4 * numElements(getInput()); }

void RMSNormOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

// Reciprocal RMS, f32, one per row.
int64_t RMSNormOp::getSavedInternalBytes() { return 4 * normRows(getInput()); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Cube 2, scale-and-add 2, scale 1, tanh 1, add 1, final product 1.
int64_t GeluOp::getForwardFlops() { return 8 * numElements(getInput()); }

void GeluOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

// Exp 1, add 1, divide 1, multiply 1.
int64_t SiluOp::getForwardFlops() { return 4 * numElements(getInput()); }

void SiluOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getInput());
}

int64_t AddOp::getForwardFlops() { return numElements(getLhs()); }

void AddOp::getSavedValues(SmallVectorImpl<Value> &) {}

int64_t MulOp::getForwardFlops() { return numElements(getLhs()); }

void MulOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getLhs());
  saved.push_back(getRhs());
}

LogicalResult RotaryOp::verify() {
  if (failed(expectRank(*this, "input", getInput(), 3,
                        "[batch, seq, heads * head_dim]")))
    return failure();
  int64_t width = tensorOf(getInput()).getShape().back();
  int64_t headDim = getHeadDim();
  if (headDim % 2 != 0)
    return emitOpError() << "head_dim must be even (RoPE rotates pairs), found "
                         << headDim;
  if (width % headDim != 0)
    return emitOpError() << "last dimension " << width
                         << " is not a multiple of head_dim " << headDim;
  if (!(getTheta().convertToDouble() > 0.0))
    return emitOpError() << "theta must be positive, found "
                         << getTheta().convertToDouble();
  return success();
}

// Two products and a sum per element; the angles are recomputed, not stored.
int64_t RotaryOp::getForwardFlops() { return 3 * numElements(getInput()); }

void RotaryOp::getSavedValues(SmallVectorImpl<Value> &) {}

//===----------------------------------------------------------------------===//
// CausalAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult CausalAttentionOp::verify() {
  for (auto [name, v] :
       {std::pair<StringRef, Value>{"q", getQ()}, {"k", getK()}, {"v", getV()}})
    if (failed(expectRank(*this, name, v, 3, "[batch, seq, heads * head_dim]")))
      return failure();
  ArrayRef<int64_t> q = tensorOf(getQ()).getShape();
  int64_t heads = getNumHeads(), kvHeads = getNumKvHeads();
  if (q[2] % heads != 0)
    return emitOpError() << "q width " << q[2]
                         << " is not a multiple of num_heads " << heads;
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " is not a multiple of num_kv_heads " << kvHeads;
  int64_t headDim = q[2] / heads;
  SmallVector<int64_t> kv = {q[0], q[1], kvHeads * headDim};
  std::string why = "num_kv_heads " + std::to_string(kvHeads) + " x head_dim " +
                    std::to_string(headDim) + " for batch and seq of q";
  if (failed(expectShape(*this, "k", getK(), kv, why)) ||
      failed(expectShape(*this, "v", getV(), kv, why)) ||
      failed(expectShape(*this, "result", getResult(), q, "the shape of q")))
    return failure();
  return expectSameElementType(*this, "q", getQ());
}

static int64_t attentionScores(CausalAttentionOp op) {
  ArrayRef<int64_t> q = tensorOf(op.getQ()).getShape();
  return q[0] * op.getNumHeads() * q[1] * q[1];
}

// Q K^T and P V are 2 * scores * head_dim each (the full square, as in the
// usual 6N + 12 L H S accounting); the softmax is 5 per score.
int64_t CausalAttentionOp::getForwardFlops() {
  return 4 * attentionScores(*this) * getHeadDim() + 5 * attentionScores(*this);
}

void CausalAttentionOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.append({getQ(), getK(), getV(), getResult()});
}

// The softmax probabilities, in the activation dtype.
int64_t CausalAttentionOp::getSavedInternalBytes() {
  DType dtype = *toDType(tensorOf(getQ()).getElementType());
  return attentionScores(*this) * bytesPerElement(dtype);
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::verify() {
  if (failed(
          expectRank(*this, "logits", getLogits(), 3, "[batch, seq, vocab]")) ||
      failed(expectRank(*this, "targets", getTargets(), 2, "[batch, seq]")))
    return failure();
  ArrayRef<int64_t> logits = tensorOf(getLogits()).getShape();
  return expectShape(*this, "targets", getTargets(), {logits[0], logits[1]},
                     "[batch, seq] of the logits");
}

// Max, subtract, exp and sum per logit.
int64_t CrossEntropyOp::getForwardFlops() {
  return 4 * numElements(getLogits());
}

void CrossEntropyOp::getSavedValues(SmallVectorImpl<Value> &saved) {
  saved.push_back(getLogits());
  saved.push_back(getTargets());
}

#include "model/ModelInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "model/ModelOps.cpp.inc"
