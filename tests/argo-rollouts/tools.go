//go:build tools

// Package tools pins the Argo Rollouts controller that build.sh builds.
package tools

import _ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
