//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "evloop: Linux only (epoll)")
	os.Exit(1)
}
