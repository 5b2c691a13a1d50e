// Package awsemu emulates the parts of AWS that cloud-provider-aws calls, over
// a sim cloud: EC2's Query API (instances, zones, tags, the VPC's subnets,
// route table and security groups), classic Elastic Load Balancing's Query
// API and the instance metadata service (IMDSv2). It lets the upstream AWS
// provider run unchanged against the sim cloud (examples/aws), and `outrigger
// sim serve` serve it.
//
// It keeps no instances or load balancers of its own: EC2's instances are
// the sim cloud's, described as EC2 would (labels are tags), and a classic
// ELB is one of the sim cloud's load balancers, made through
// simcloud.CreateLoadBalancerWithData: its listeners' ports, tags, idle
// timeout and backends (the registered instances) are the generic model's,
// and what only ELB has (DNS name, scheme, subnets, security groups, health
// check, HTTP and SSL listeners) is attached to it as provider data (classic).
// So the sim cloud's own API lists, changes and deletes the same load
// balancer the ELB API made. Only the AWS-only state lives here: security
// groups, IMDS session tokens, the instance the metadata service describes.
//
// Calls are counted ("EC2:DescribeInstances", "ELB:CreateLoadBalancer") and
// pass through the sim cloud's fault knobs (simcloud.Cloud.Gate), answered in
// each service's own words.
package awsemu
