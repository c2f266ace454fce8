;; wrong_signature.wat -- tests the signature check: exports `toy_apply`, but as (i32) -> i32
;; instead of (i64) -> i64. Loading it for toy.apply must fail with an error naming the expected
;; and the actual type, not fail at the first call.
(module
  (memory (export "memory") 2)
  (func (export "toy_apply") (param $arg i32) (result i32)
    local.get $arg))
