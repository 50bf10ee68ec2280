package framework_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tidemark-go/tidemark/framework"
)

// A mistake in a config names its line, its key and what is valid there.
func ExampleLoadConfig_mistake() {
	_, err := framework.LoadConfig(strings.NewReader(`eventFeeds:
  - name: orders
    filename: orders.csv
    overload: {policy: pause}
processorGroups:
  - agentNme: orders-agent
    processors: [ledger]
`))
	fmt.Println(err)
	var ce *framework.ConfigError
	fmt.Println(errors.Is(err, framework.ErrInvalidConfig), errors.As(err, &ce) && ce.Line == 6)
	// Output:
	// line 6: processorGroups[0]: unknown key "agentNme"; did you mean "agentName"? (valid: agentName, processors, failure, store, storeOptions, resume)
	// true true
}

// Values name environment variables, with defaults.
func ExampleLoadConfig_environment() {
	os.Setenv("ORDERS_DIR", "/srv/orders")
	defer os.Unsetenv("ORDERS_DIR")
	cfg, err := framework.LoadConfig(strings.NewReader(`eventFeeds:
  - name: orders
    filename: ${ORDERS_DIR}/orders.csv
    pointerDir: ${ORDERS_POINTERS:-/var/lib/orders}
    overload: {policy: PAUSE}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Feeds[0].File.Filename, cfg.Feeds[0].File.PointerDir)
	// Output:
	// /srv/orders/orders.csv /var/lib/orders
}
