//===- Device.cpp - Device allocations, counted ---------------------------===//

#include "exec/Device.h"

namespace zeroc::runtime {

char *Device::allocate(int64_t bytes, bool onDevice, int64_t alignment,
                       MemoryUse use) {
  char *p = allocateMemory(bytes, onDevice, alignment);
  if (onDevice) {
    {
      std::lock_guard<std::mutex> lock(allocationsMutex);
      allocations[p] = {bytes, use};
    }
    deviceMemory().allocated(use, bytes);
  }
  return p;
}

void Device::release(char *p, bool onDevice) {
  if (onDevice && p) {
    std::pair<int64_t, MemoryUse> a{0, MemoryUse::PlannedTensors};
    {
      std::lock_guard<std::mutex> lock(allocationsMutex);
      auto it = allocations.find(p);
      if (it != allocations.end()) {
        a = it->second;
        allocations.erase(it);
      }
    }
    deviceMemory().released(a.second, a.first);
  }
  releaseMemory(p, onDevice);
}

void Device::copyRows(void *dst, int64_t dstPitch, const void *src,
                      int64_t srcPitch, int64_t rowBytes, int64_t rows) {
  for (int64_t k = 0; k < rows; ++k)
    copy(static_cast<char *>(dst) + k * dstPitch,
         static_cast<const char *>(src) + k * srcPitch, rowBytes);
}

void Device::zeroRows(void *dst, int64_t pitch, int64_t rowBytes,
                      int64_t rows) {
  for (int64_t k = 0; k < rows; ++k)
    zero(static_cast<char *>(dst) + k * pitch, rowBytes);
}

void packParamGradients(Device &dev, char *send,
                        const ParamReduceScatterParts &parts,
                        const std::vector<ParamGradient> &params,
                        const std::vector<const void *> &grads) {
  int64_t e = params.front().elementBytes;
  int64_t block = parts.blockElements * e;
  for (size_t k = 0; k < params.size(); ++k) {
    if (parts.slots[k] < 0)
      continue; // Goes alone.
    const ParamShardLayout &l = params[k].layout;
    int64_t n = l.numel, s = l.shardSize(), ranks = l.worldSize;
    int64_t slot = parts.slotElements[k];
    char *column = send + parts.slots[k] * e;
    const char *g = static_cast<const char *>(grads[k]);
    // The ranks whose chunk is whole, then the one with the rest (the
    // last shard of a parameter that does not divide), then any with none.
    int64_t whole = s > 0 ? n / s : 0, rest = n - whole * s;
    dev.copyRows(column, block, g, s * e, s * e, whole);
    dev.zeroRows(column + s * e, block, (slot - s) * e, whole);
    if (whole < ranks) {
      char *partial = column + whole * block;
      dev.copy(partial, g + whole * s * e, rest * e);
      dev.zero(partial + rest * e, (slot - rest) * e);
      dev.zeroRows(partial + block, block, slot * e, ranks - whole - 1);
    }
  }
}

double Device::sumOfSquaresOf(const std::vector<Tensor> &grads) {
  double total = 0;
  for (const Tensor &g : grads)
    total += sumOfSquares(g);
  return total;
}

Status Device::scaleAll(const std::vector<Tensor> &tensors, float factor) {
  for (const Tensor &t : tensors)
    ZEROC_RETURN_IF_ERROR(scaleInPlace(t, factor));
  return {};
}

Status Device::adamUpdates(const cpu::AdamSettings &settings, int64_t step,
                           const std::vector<AdamPart> &parts) {
  for (const AdamPart &p : parts)
    ZEROC_RETURN_IF_ERROR(adamUpdate(settings, step, p.grad, p.master, p.expAvg,
                                     p.expAvgSq,
                                     p.param16 ? &*p.param16 : nullptr));
  return {};
}

} // namespace zeroc::runtime
