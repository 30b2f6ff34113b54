module github.com/warren-mesh/warren

go 1.26
