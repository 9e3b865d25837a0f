// A 1024x1024x1024 f32 matrix multiplication, the shipped example of the README.
// ireetune tune-dispatch examples/matmul.mlir --target cpu --num-candidates 32
func.func @matmul(%lhs: tensor<1024x1024xf32>, %rhs: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<1024x1024xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %result = linalg.matmul ins(%lhs, %rhs : tensor<1024x1024xf32>, tensor<1024x1024xf32>)
                          outs(%init : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %result : tensor<1024x1024xf32>
}
