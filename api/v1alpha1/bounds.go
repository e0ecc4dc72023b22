package v1alpha1

// The largest machine the API server admits: the validation rules of
// Shape, ClaimShape and FlexibleShape say the same in CEL. Code that reads
// shapes checks them again, for objects stored before the rules existed:
// these bounds keep millicores, bytes and their sums well inside an int64.
const (
	MaxMachineCPU    = "10000"
	MaxMachineMemory = "64Ti"
)

// Every validation rule that reads a quantity first lets it pass when its
// exponent has three digits or more (string(q).matches('[eE][+-]?[0-9]{3}')
// || ...): comparing 1e33333336 with another quantity takes the API server
// tens of seconds, and the pattern hack/crdbounds puts on every quantity
// refuses such a value anyway, with a message naming the field.
