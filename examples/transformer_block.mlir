// A transformer-style block in f16: single-head attention over 1024 tokens, then a ReLU MLP.
// Used for the H100 whole-model figure in docs/benchmarks.md.
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @block(%x: tensor<1024x1024xf16>, %wq: tensor<1024x1024xf16>, %wk: tensor<1024x1024xf16>,
                 %wv: tensor<1024x1024xf16>, %w1: tensor<1024x4096xf16>, %w2: tensor<4096x1024xf16>) -> tensor<1024x1024xf16> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024x1024xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %eh = tensor.empty() : tensor<1024x1024xf16>
  %q32 = linalg.matmul ins(%x, %wq : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %k32 = linalg.matmul ins(%x, %wk : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %v32 = linalg.matmul ins(%x, %wv : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %q = arith.truncf %q32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  %k = arith.truncf %k32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  %v = arith.truncf %v32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  %s = linalg.matmul indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>]
       ins(%q, %k : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %p32 = linalg.softmax dimension(1) ins(%s : tensor<1024x1024xf32>) outs(%e : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %p = arith.truncf %p32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  %o32 = linalg.matmul ins(%p, %v : tensor<1024x1024xf16>, tensor<1024x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %o = arith.truncf %o32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  %e4 = tensor.empty() : tensor<1024x4096xf32>
  %z4 = linalg.fill ins(%zero : f32) outs(%e4 : tensor<1024x4096xf32>) -> tensor<1024x4096xf32>
  %h32 = linalg.matmul ins(%o, %w1 : tensor<1024x1024xf16>, tensor<1024x4096xf16>) outs(%z4 : tensor<1024x4096xf32>) -> tensor<1024x4096xf32>
  %r32 = arith.maximumf %h32, %z4 : tensor<1024x4096xf32>
  %h = arith.truncf %r32 : tensor<1024x4096xf32> to tensor<1024x4096xf16>
  %y32 = linalg.matmul ins(%h, %w2 : tensor<1024x4096xf16>, tensor<4096x1024xf16>) outs(%z : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %y = arith.truncf %y32 : tensor<1024x1024xf32> to tensor<1024x1024xf16>
  return %y : tensor<1024x1024xf16>
}
