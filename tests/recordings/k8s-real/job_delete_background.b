{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"probe-copy","group":"batch","kind":"jobs","uid":"7da430fc-4d9c-4b91-b471-c5ef374f8931"}}
