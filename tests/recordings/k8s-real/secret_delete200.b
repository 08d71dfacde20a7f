{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"probe-record","kind":"secrets","uid":"3bb81fce-3372-4f28-99d9-113fff708e67"}}
