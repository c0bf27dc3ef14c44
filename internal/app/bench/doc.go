// Package bench holds the measurements behind `belay bench`. Each one
// reports what it measured in a JSON-ready result, with a baseline taken in
// the same run where one exists, so that numbers are read as ratios.
package bench
