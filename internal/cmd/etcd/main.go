// Command etcd is etcd itself — go.etcd.io/etcd/server/v3's etcdmain at
// the version go.mod pins — for the fleet demo and for trying a fleet by
// hand (make etcd builds bin/etcd). cortex-sync never links it: in
// production, run etcd as its own service (docs/fleet.md).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
