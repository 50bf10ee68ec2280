package framework_test

// childEnv selects a child mode of the test binary (see TestMain).
const childEnv = "TIDEMARK_FRAMEWORK_CHILD"

func runChild(mode string) int { return 2 }
