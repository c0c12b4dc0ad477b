module github.com/ratecell/ratecell-go

go 1.24.0
