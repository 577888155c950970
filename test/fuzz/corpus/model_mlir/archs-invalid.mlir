// Verifier errors of the sliding window, scale, split, split_backward and
// rmsnorm's unit offset, one case each.
// RUN: zeroc-opt %s -split-input-file -verify-diagnostics

func.func @negative_window(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>) {
  // expected-error @+1 {{window must be >= 0 (0: none), found -2}}
  %0 = model.causal_attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = -2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x16xf32>
  return
}

// -----

func.func @backward_window(%q: tensor<2x3x16xf32>, %k: tensor<2x3x8xf32>, %do: tensor<2x3x16xf32>) {
  %o, %l = model.causal_attention %q, %k, %k {num_heads = 4 : i64, num_kv_heads = 2 : i64, window = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) -> (tensor<2x3x16xf32>, tensor<2x4x3xf32>)
  // expected-error @+1 {{window 0 is not its forward's (2)}}
  %0:3 = model.causal_attention_backward %q, %k, %k, %o, %do, %l {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>, tensor<2x3x16xf32>, tensor<2x3x16xf32>, tensor<2x4x3xf32>) -> (tensor<2x3x16xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>)
  return
}

// -----

func.func @infinite_scale(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{factor must be finite, found INF}}
  %0 = model.scale %x {factor = 0x7FF0000000000000 : f64} : tensor<2x3xf32>
  return
}

// -----

func.func @split_widths(%x: tensor<2x3x8xf32>) {
  // expected-error @+1 {{the results' last dimensions sum to 7, expected 8 (the last dimension of the input)}}
  %0:2 = model.split %x : (tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x3xf32>)
  return
}

// -----

func.func @split_rows(%x: tensor<2x3x8xf32>) {
  // expected-error @+1 {{result #1 has type 'tensor<3x2x4xf32>', expected the leading dimensions and element type of the input 'tensor<2x3x8xf32>' with any last dimension}}
  %0:2 = model.split %x : (tensor<2x3x8xf32>) -> (tensor<2x3x4xf32>, tensor<3x2x4xf32>)
  return
}

// -----

func.func @split_dtype(%x: tensor<2x3x8xf32>) {
  // expected-error @+1 {{result #0 has type 'tensor<2x3x4xbf16>'}}
  %0:2 = model.split %x : (tensor<2x3x8xf32>) -> (tensor<2x3x4xbf16>, tensor<2x3x4xf32>)
  return
}

// -----

func.func @split_nothing(%x: tensor<2x3x8xf32>) {
  // expected-error @+1 {{expects at least one result}}
  model.split %x : (tensor<2x3x8xf32>) -> ()
  return
}

// -----

func.func @split_backward_widths(%a: tensor<2x3x4xf32>) {
  // expected-error @+1 {{the operands' last dimensions sum to 8, expected 12 (the last dimension of the result)}}
  %0 = model.split_backward %a, %a : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x12xf32>
  return
}

// -----

func.func @unit_offset_mismatch(%x: tensor<2x3x16xf32>, %g: tensor<16xf32>) {
  %y, %s = model.rmsnorm %x, %g {unit_offset} : (tensor<2x3x16xf32>, tensor<16xf32>) -> (tensor<2x3x16xf32>, tensor<2x3xf32>)
  // expected-error @+1 {{unit_offset must be its forward model.rmsnorm's}}
  %0:2 = model.rmsnorm_backward %x, %g, %x, %s : (tensor<2x3x16xf32>, tensor<16xf32>, tensor<2x3x16xf32>, tensor<2x3xf32>) -> (tensor<2x3x16xf32>, tensor<16xf32>)
  return
}
