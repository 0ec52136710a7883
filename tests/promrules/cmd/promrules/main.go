// promrules checks Prometheus alerting rules and dashboard queries with Prometheus' own
// parsers (model/rulefmt and promql/parser), so that a chart never ships a rule Prometheus
// would refuse.
//
//	promrules rules FILE     parses FILE as a Prometheus rule file (the `groups:` document),
//	                         reporting every error rulefmt finds; prints each rule's metric names
//	promrules exprs          reads one PromQL expression per line on stdin; prints the metric
//	                         names each selects, one per line
//	promrules json FILE      prints the YAML documents of FILE (e.g. a chart's rendering) as
//	                         one JSON array, for checks written in languages without YAML
//
// Exits 1 with the parser's messages when anything fails to parse.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

var promql = parser.NewParser(parser.Options{})

func main() {
	if len(os.Args) < 2 {
		fatal("usage: promrules rules FILE | promrules exprs < EXPRS")
	}
	var names map[string]bool
	var err error
	switch os.Args[1] {
	case "rules":
		if len(os.Args) != 3 {
			fatal("usage: promrules rules FILE")
		}
		names, err = ruleMetrics(os.Args[2])
	case "exprs":
		names, err = exprMetrics(bufio.NewScanner(os.Stdin))
	case "json":
		if len(os.Args) != 3 {
			fatal("usage: promrules json FILE")
		}
		err = yamlToJSON(os.Args[2])
	default:
		fatal("unknown command " + os.Args[1])
	}
	if err != nil {
		fatal(err.Error())
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		fmt.Println(n)
	}
}

func ruleMetrics(path string) (map[string]bool, error) {
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, promql, slog.Default())
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s", strings.Join(msgs, "\n"))
	}
	names := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if err := addMetrics(r.Expr, names); err != nil {
				return nil, err
			}
		}
	}
	return names, nil
}

func exprMetrics(in *bufio.Scanner) (map[string]bool, error) {
	names := map[string]bool{}
	for in.Scan() {
		if line := strings.TrimSpace(in.Text()); line != "" {
			if err := addMetrics(line, names); err != nil {
				return nil, err
			}
		}
	}
	return names, in.Err()
}

func addMetrics(expr string, names map[string]bool) error {
	parsed, err := promql.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("%q: %w", expr, err)
	}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if v, ok := node.(*parser.VectorSelector); ok && v.Name != "" {
			names[v.Name] = true
		}
		return nil
	})
	return nil
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "promrules:", msg)
	os.Exit(1)
}

func yamlToJSON(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	docs := []any{}
	decoder := yaml.NewDecoder(f)
	for {
		var doc any
		if err := decoder.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(docs)
}
