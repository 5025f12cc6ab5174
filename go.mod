module github.com/captchaq/captchaq

go 1.26.8

require github.com/rabbitmq/amqp091-go v1.16.0 // indirect
