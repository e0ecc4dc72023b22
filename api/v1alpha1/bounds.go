package v1alpha1

// The largest machine the API server admits: the validation rules of
// Shape, ClaimShape and FlexibleShape say the same in CEL. Code that reads
// shapes checks them again, for objects stored before the rules existed:
// these bounds keep millicores, bytes and their sums well inside an int64.
const (
	MaxMachineCPU    = "10000"
	MaxMachineMemory = "64Ti"
)
