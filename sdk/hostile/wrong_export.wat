;; wrong_export.wat -- tests the export check: a valid module that exports memory and a function,
;; but not `toy_apply` (nor any other graftpoint function). Loading it for toy.apply must fail with
;; an error naming the missing export.
(module
  (memory (export "memory") 2)
  (func (export "toy_apply_v2") (param $arg i64) (result i64)
    local.get $arg))
