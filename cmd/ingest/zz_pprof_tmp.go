package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if a := os.Getenv("SLUICE_TMP_PPROF"); a != "" {
		go http.ListenAndServe(a, nil)
	}
}
