module github.com/captchaq/captchaq

go 1.26.8
